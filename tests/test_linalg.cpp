#include <gtest/gtest.h>

#include "golden.h"
