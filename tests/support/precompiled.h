// The headers most test programs include, precompiled once (tests/CMakeLists.txt) and
// shared by every test program but the GPU ones: parsing them took about half of each test
// program's compile. Only headers that any test may include unconditionally belong here.
#pragma once

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "config/config.h"
#include "engine/engine.h"
#include "parallel/runtime.h"
#include "support/check.h"
#include "triad.h"
