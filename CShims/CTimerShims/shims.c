#include "CTimerShims.h"
