"""spotshift's demo: the three parts on a real local Kubernetes control plane, in one command.

``bash demo/run.sh`` (or ``python3 -m demo`` once installed and built) starts the e2e tier's control plane
(:mod:`tests.support.controlplane`), runs ``spot-extender`` (webhook and scheduler extender, certificates from
``spot-certs``) and ``spot-rescheduler run`` against it as local processes, creates workloads while only
on-demand nodes exist, then adds spot capacity and shows the rescheduler emptying on-demand nodes. See
:mod:`demo.scenario` for the story and :mod:`demo.view` for what is drawn.
"""
