"""The search: its vocabulary (core), the strategies, the optimize loop and how a run is set up (session).
The policies, the proposers, the run store and the bench live beside it: `kernelband.policies`,
`kernelband.proposers`, `kernelband.store`, `kernelband.bench`."""
