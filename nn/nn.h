// The nn layer in one include: modules, layers, init, losses, optimizers, schedules, checkpoints.
#pragma once
#include "nn/attention.h"
#include "nn/containers.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/mlp.h"
#include "nn/module.h"
#include "nn/optim/adam.h"
#include "nn/optim/clip.h"
#include "nn/optim/schedule.h"
#include "nn/optim/sgd.h"
#include "nn/state.h"
