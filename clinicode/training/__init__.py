"""Training, one room a step: `run` (a run: the folder, the kind's `fit`, `train` and `retrain`), `loop` (the epoch
loop a kind's `fit` is handed, and its set-up), `finish` (threshold on dev, test once, the final checkpoint), `state`
(--resume's state, the optimiser, the weight average). `clinicode.train` is the verb's name for them."""
