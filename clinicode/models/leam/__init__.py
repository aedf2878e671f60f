"""LEAM (Wang et al., ACL 2018, with clinicode's options), whole: its options (`options`), maths (`model`), fast
kernels (`kernels`), scorer (`scorer`) and its model kind (`kind`, registered in `clinicode.models`)."""
