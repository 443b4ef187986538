// Transparent huge pages for large, long-lived buffers (packed expert weights).
#pragma once

#include <cstddef>

namespace mxmoe {

// Asks the kernel (madvise MADV_HUGEPAGE) to back the 2 MB-aligned part of [p, p + n) with
// 2 MB pages. Call before the first write: pages touched earlier stay 4 KB. Decode streams
// gigabytes of weights, and 4 KB pages cost a page walk every 4 KB (measured: +3-6% weight
// GB/s at 1-8 tokens). A hint only: silently does nothing where unsupported.
void advise_huge_pages(void* p, std::size_t n) noexcept;

}  // namespace mxmoe
