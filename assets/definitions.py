"""The Definitions that `workspace.yaml` loads: `dagster dev -w workspace.yaml` shows everything here."""

from __future__ import annotations

import dagster as dg

defs = dg.Definitions()
