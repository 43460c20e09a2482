"""What the post-training methods share for collecting rollouts: recorders inside the sub-envs (`recorder`), the
recorded episodes (`episodes`), running an actor for a round (`rollouts.collect_round`) and writing episodes as
a demo file (`files.write_rollouts`)."""
