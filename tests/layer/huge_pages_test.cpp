// advise_huge_pages is a hint: any range (empty, unaligned, smaller than a huge page, already
// written) must be accepted and leave the memory's contents and use unchanged.
#include "base/huge_pages.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

namespace mxmoe {
namespace {

TEST(HugePages, AnyRangeIsAcceptedAndContentsSurvive) {
  advise_huge_pages(nullptr, 0);
  for (std::size_t n : {std::size_t{1}, std::size_t{4096}, std::size_t{5} << 20}) {
    std::vector<std::uint32_t> v(n);
    std::iota(v.begin(), v.end(), 7u);  // written before the advice: must survive it
    advise_huge_pages(reinterpret_cast<std::uint8_t*>(v.data()) + 3, v.size() * 4 - 3);
    for (std::size_t i = 0; i < n; i += 997) ASSERT_EQ(v[i], 7u + i);
    v.back() = 1;
    EXPECT_EQ(v.back(), 1u);
  }
  // Before the first touch, as the packers use it.
  const std::size_t n = std::size_t{6} << 20;
  auto fresh = std::make_unique_for_overwrite<std::uint8_t[]>(n);
  advise_huge_pages(fresh.get(), n);
  for (std::size_t i = 0; i < n; ++i) fresh[i] = static_cast<std::uint8_t>(i * 31);
  for (std::size_t i = 0; i < n; i += 4093) ASSERT_EQ(fresh[i], static_cast<std::uint8_t>(i * 31));
}

}  // namespace
}  // namespace mxmoe
