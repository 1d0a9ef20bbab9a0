"""A worker slot run in its own process: `python -m harness.dagster_worker SETUP_JSON SLOT`."""

import sys

from cohort.assets.worker import worker_run_config
from harness.dagster_group import Setup, config_for, definitions_for, instance_for


def main() -> int:
    setup, slot = Setup.from_json(sys.argv[1]), int(sys.argv[2])
    config = config_for(setup)
    defs = definitions_for(setup)
    job = defs.resolve_job_def(f"cohort_worker__{config.group.replace('-', '_')}")
    result = job.execute_in_process(
        run_config=worker_run_config(config, slot),
        instance=instance_for(setup),
        tags={"cohort/slot": str(slot)},
        raise_on_error=False,
    )
    return 0 if result.success else 1


if __name__ == "__main__":
    raise SystemExit(main())
