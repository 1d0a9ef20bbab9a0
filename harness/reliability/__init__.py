"""The fault scenarios the reliability tests and benchmarks/reliability.py, benchmarks/soak.py and
benchmarks/contention.py run: SIGKILL (`faults`), SIGSTOP zombies (`zombie_scenarios`), broker faults
(`broker_scenarios`, behind `broker_proxy`), store contention (`contention_worker`, `contention_checks`), and
what each leaves behind (`outcome`)."""
