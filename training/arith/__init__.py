"""How the embedded arithmetic models were made: the policy's training and evaluation, the PRM's
three label sources, its training and the whole pipeline that ships it. It builds on the general
PRM kit (:mod:`prmsearch.prm`) and sits above it; the command lines are in
:mod:`training.arith`."""
