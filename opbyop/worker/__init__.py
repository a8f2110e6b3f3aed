"""Long-lived worker processes that keep the compiler, golden and device warm.

The compiler can abort its process (LLVM fatal errors, TT_FATAL): each worker's analysis runs in a
child process; a child that dies or hangs costs one op a `crashed` / `timeout` record and the child
is replaced. Requests carry ids and fresh scratch directories, so no op is ever credited with
another op's result (a reused compile process could otherwise hand a stale result to the next op).
"""
