#pragma once
// Where Ray programs find RayLog and RAY_CHECK (ray/util/logging.h), renamed: rayd keeps them
// with RAYDLOG in rayd/api/logging.h, which rayd/api.h includes.

#include "rayd/api/logging.h"
