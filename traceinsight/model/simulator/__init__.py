"""The simulator's parts, driven by `traceinsight.model.simulate`: the shared core (`core`), the plan's layout on the
SMs (`layout`) and the three runners that give bit-identical results (`shared_loop`, `single_loop`,
`static_bulk`)."""
