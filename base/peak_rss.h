// Peak resident memory of this process, for metrics and benchmark reports.
#pragma once

namespace glm4 {

double peak_rss_mb();  // of this process so far

}  // namespace glm4
