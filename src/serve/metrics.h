// Prometheus text exposition (format 0.0.4) of the scheduler's statistics. Names carry the prefix `tracelm:` as
// vLLM's carry `vllm:`; every sample has the label model_name.
#pragma once

#include <string>

#include "serve/scheduler.h"

namespace tracelm::serve {

// The KV cache's use as a fraction in [0, 1]: blocks in use over the pool's blocks, of whichever pool (the full one,
// or the sliding-window layers' own) is fuller, since that one refuses admissions first.
double kv_cache_usage(const SchedulerStats& stats);
// The body of GET /metrics (content type "text/plain; version=0.0.4").
std::string prometheus_text(const SchedulerStats& stats, const std::string& model_name);

}  // namespace tracelm::serve
