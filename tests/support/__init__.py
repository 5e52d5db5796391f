"""Support code for the tests and the benchmarks, not part of the product: the seeded cluster generator
(:mod:`tests.support.cluster_gen`) and the pusher baseline (:mod:`tests.support.pusher`)."""
