"""Jobs whose launchers someone else starts, one per machine or task:
they meet over the rendezvous and form one MPI world through hydra's
manual launcher.

Modules:
    rendezvous        the launchers meet: members' hellos, the
                      coordinator's placement (protocol in its comment)
    hydra_manual      hydra's manual launcher: proxy commands <-> data
    placed_job        running a placed job: the coordinator's mpiexec
                      under the supervisor, a member's own proxy
(The TF_CONFIG front end, an entry point like hbrun, is the top level's
tf_config_launch.)
    hosted_job        Spark's and Ray's driver side: coordinator, mpiexec
    hosted_rank       a Spark task's / Ray actor's side: hosts one rank
"""
