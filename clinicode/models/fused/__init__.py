"""The fused model (#41), whole: LEAM's and tfidf-lr's logits and a title match per code, mixed with weights learnt on
dev (`fusion`), its scorer (`scorer`), the steps around LEAM's epoch loop (`training`) and its model kind (`kind`,
registered in `clinicode.models`)."""
