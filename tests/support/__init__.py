"""Support code for the tests and the benchmarks, not part of the product.

- In-process stand-ins: the in-memory API server (:mod:`tests.support.fake_api`) and the product's HTTP servers
  on free ports (:mod:`tests.support.servers`); the check every config error message passes
  (:mod:`tests.support.config_helpers`).
- The real control plane of the e2e tier (:mod:`tests.support.controlplane`; its build script and release list
  are tests/e2e/controlplane/build.sh and releases.env) and the processes run against it: the extender
  (:mod:`tests.support.extender_server`), the rescheduler and its world (:mod:`tests.support.rescheduler_world`),
  node provisioners (:mod:`tests.support.provisioner`), an admission gate (:mod:`tests.support.admission_gate`),
  bulk cluster loading (:mod:`tests.support.cluster_load`), the churn replay cloud
  (:mod:`tests.support.replay_cloud`) and the container image (:mod:`tests.support.image`).
- Generators and baselines: the seeded cluster generator (:mod:`tests.support.cluster_gen`), scheduling cases
  (:mod:`tests.support.scheduling_cases`), plan checks (:mod:`tests.support.plan_check`) and the pusher baseline
  (:mod:`tests.support.pusher`).

Benchmarks, tools and the demo import from here and from :mod:`tests.builders`, never from tests.unit or tests.e2e.
"""
