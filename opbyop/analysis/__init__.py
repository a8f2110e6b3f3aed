"""The analysis of one op (or one whole model) inside a worker: the pipeline through compile, device
run and golden (`analyzer`), the judgment of a failure's fault (`attribution`), the accuracy trace of a
whole model against XLA's intermediates (`accuracy_trace`) and the op's memory on the core grid
(`op_memory`)."""
