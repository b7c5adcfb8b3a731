"""Borg's section-5 utilization experiments (Verma et al., EuroSys 2015): cell compaction of policies on synthetic and trace workloads."""
