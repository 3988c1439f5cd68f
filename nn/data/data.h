// The data layer in one include: datasets and readers, transforms, the loader, and the
// pasted-objects localisation data set.
#pragma once
#include "nn/data/cifar.h"
#include "nn/data/dataset.h"
#include "nn/data/idx.h"
#include "nn/data/image_folder.h"
#include "nn/data/image_grid.h"
#include "nn/data/loader.h"
#include "nn/data/open.h"
#include "nn/data/pasted.h"
#include "nn/data/tokens.h"
#include "nn/data/transforms.h"
