#include "fusion/fusion.h"
kf_status kf_plan_estimate(kf_plan *plan, const char *device) { (void)plan; (void)device; return KF_OK; }
