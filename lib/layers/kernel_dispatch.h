// Calls an HWY_EXPORT-ed kernel on the target its family was given (cnnbench::use_kernel_choice)
// rather than on Highway's one process-wide choice: each family runs on the target that is
// fastest for it, which is not always the widest.
#pragma once

#include <hwy/highway.h>

#include "cnnbench/isa.hpp"

#if HWY_IDE || ((HWY_TARGETS & (HWY_TARGETS - 1)) == 0)
// One target compiled: HWY_EXPORT's table has a single entry.
#define CNNBENCH_DISPATCH(FAMILY, FUNC_NAME) HWY_STATIC_DISPATCH(FUNC_NAME)
#else
#define CNNBENCH_DISPATCH(FAMILY, FUNC_NAME) \
  (*(HWY_DISPATCH_TABLE(FUNC_NAME)[::cnnbench::kernel_table_index(::cnnbench::KernelFamily::FAMILY)]))
#endif
