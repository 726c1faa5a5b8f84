"""Fault injection with real processes and real Redis servers.

Each module is one group of scenarios. The coordinators run as real ``subagent-bus coordinator``
processes; faults are real signals (SIGKILL, SIGSTOP/SIGCONT, SIGTERM), a real server killed and
restarted from its append-only file, a TCP proxy that drops a reply, and a network namespace whose link
is cut. After each scenario the checker (``tests/checker.py``) compares what was published with what
the coordinators applied and reports lost, duplicated, unexpected and out-of-order counts; the counts of
every scenario are printed in a "fault-injection reports" section at the end of the pytest run.

The default run (``pytest``) holds a representative subset; ``pytest -m slow tests/faults`` runs the
long ones (network partitions, the ``everysec`` server crash, long consumer churn, large backlogs).
"""
