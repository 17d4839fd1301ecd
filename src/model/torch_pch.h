#pragma once
// The precompiled header shared by every LibTorch translation unit (cmake/pipetrain.cmake).
#include <torch/torch.h>
