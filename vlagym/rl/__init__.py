"""RL with stable-baselines3: PPO post-training of the BC-trained VLA, and PPO/SAC baselines from scratch.

`RLConfig` and `train_rl` (`vlagym train-rl`) live in `vlagym.rl.ppo`; the VLA as an SB3 policy in
`vlagym.rl.sb3_policy`; the env adapters in `vlagym.rl.envs`. Importing this package imports torch and SB3.
"""
