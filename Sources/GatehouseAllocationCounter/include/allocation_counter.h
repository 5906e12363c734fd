#ifndef GATEHOUSE_ALLOCATION_COUNTER_H
#define GATEHOUSE_ALLOCATION_COUNTER_H
// A malloc-counting shim for tests, loaded into a gateway process with LD_PRELOAD (see
// counter.c). Nothing in the gateway links it.
#endif
