"""ManiSkill3 peg-insertion targets.

Importing this package is light: SAPIEN and ManiSkill load only when an env is made.
"""
