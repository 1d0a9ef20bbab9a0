"""The dg component: `CohortGroupComponent` (one consumer group declared in a dg project's `defs.yaml`, written
`type: cohort.assets.component.CohortGroupComponent`), with its settings, the `pipeline` block, the shared
resources, the scaffolder and the one-line load errors beside it. This package is Cohort's dg registry module."""

from cohort.assets.component.group import CohortGroupComponent

__all__ = ["CohortGroupComponent"]
