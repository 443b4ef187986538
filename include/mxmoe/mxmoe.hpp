// The umbrella header of mxmoe's C++ API.
#pragma once

#include "mxmoe/checkpoint.hpp"
#include "mxmoe/communicator.hpp"
#include "mxmoe/deployment.hpp"
#include "mxmoe/errors.hpp"
#include "mxmoe/expert_parallel.hpp"
#include "mxmoe/format.hpp"
#include "mxmoe/generate.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/layer.hpp"
#include "mxmoe/layer_from_tensors.hpp"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/model.hpp"
#include "mxmoe/oracle.hpp"
#include "mxmoe/placement.hpp"
#include "mxmoe/runtime.hpp"
#include "mxmoe/weights.hpp"
