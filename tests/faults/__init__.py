"""The fault-injection suite: seeded random fault schedules over a real bookie cluster
with writer, reader and recovery processes, then checks that nothing promised was lost."""
