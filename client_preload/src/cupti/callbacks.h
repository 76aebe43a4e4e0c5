// CUPTI's callback API under tally (cupti_callback_api.cpp): one subscriber, as in
// CUPTI, and of the domains only the resource domain's context callbacks, which the
// client raises where it makes and destroys contexts.
#pragma once
#include "driver_headers.h"

namespace tally::client::cupti {

void context_created(CUcontext context);
void context_destroy_starting(CUcontext context);

}  // namespace tally::client::cupti
