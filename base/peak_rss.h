// Peak resident memory of this process, for metrics and benchmark reports.
#pragma once

namespace glm4 {

double peak_rss_mb();  // of this process so far, in MiB
// Starts the peak over from the present resident memory (Linux's clear_refs), so that a
// benchmark reports one phase's peak.
void reset_peak_rss();

}  // namespace glm4
