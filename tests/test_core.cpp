#include <gtest/gtest.h>

#include "ember/ember.h"

TEST(Core, AddBroadcast) {
  ember::Tensor a = ember::arange(6).reshape({2, 3}).to(ember::kFloat32);
  ember::Tensor b = ember::tensor<float>({10, 20, 30});
  ember::Tensor c = a + b;
  EXPECT_EQ(c.at<float>({1, 2}), 35.0f);
}
