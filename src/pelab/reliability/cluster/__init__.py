"""The cluster: what a SLURM job asks and whether its partition can start it, and SLURM's requeue
signal handled from the job's first line."""
