"""The tfidf-lr baseline, whole: the model (`baseline`, one logistic regression per code over tf-idf) and its model
kind (`kind`, registered in `clinicode.models`)."""
