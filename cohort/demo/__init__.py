"""The demo: an example code location (`cohort.demo.definitions`, what `workspace.yaml` loads) and the
`make demo` story (`python -m cohort.demo`). An example built with the library, not part of it."""
