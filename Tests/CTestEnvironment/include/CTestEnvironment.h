#ifndef C_TEST_ENVIRONMENT_H
#define C_TEST_ENVIRONMENT_H

/// Nonzero when the test process asked Swift's runtime to run its global executor on Dispatch's
/// ordinary global queues (see environment.c).
int ctk_tests_use_ordinary_global_queues(void);

#endif
