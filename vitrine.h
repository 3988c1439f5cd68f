// Vitrine: the whole public API in one header.
#pragma once
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "autograd/tensor.h"
#include "backends/backend.h"
#include "backends/generator.h"
#include "backends/threads.h"
#include "models/vit.h"
#include "nn/nn.h"
#include "ops/ops.h"
