"""Post-training of the BC-trained VLA, one small package per method, and PPO/SAC baselines from scratch.

`vlagym.rl.ppo`: PPO from stable-baselines3 on the whole VLA (`RLConfig`, `train_rl`; `vlagym train-rl`);
`vlagym.rl.fbc`: success-filtered BC (`vlagym train-fbc`); `vlagym.rl.sb3_policy`: the VLA as an SB3 policy;
`vlagym.rl.envs`: the env adapters SB3 needs. Importing this package (or a method's config) loads neither torch
nor SB3: they load with the code that trains.
"""
