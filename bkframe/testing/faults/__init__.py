"""Fault tooling, apart from the plugin author's kit (:mod:`bkframe.testing`): the fault
layers a test bookie installs (:mod:`.bookie`, ``python -m bkframe.testing.faults.bookie``):
power loss (:mod:`.powerloss`), injected write failures (:mod:`.write_faults`), a disk that
fills up (:mod:`.filling_disk`), clock faults (:mod:`.clocks`); real small filesystems
(:mod:`.small_fs`); simulated hosts in network namespaces (:mod:`.hosts`) and a link proxy
that delays, narrows, blackholes, tears and resets links (:mod:`.link_proxy`,
:mod:`.link_control`). docs/reliability.md says how the fault suite uses them."""
