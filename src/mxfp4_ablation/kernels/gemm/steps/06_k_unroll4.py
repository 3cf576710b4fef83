"""Step 6: the loop slot runs four K steps per iteration with two peeled in front; every loop step
then issues the same loads (read by the scale slot: the gather past the end becomes a dummy)."""

from dataclasses import replace

from mxfp4_ablation.family import Expect, Switch

from ..seeds import PR_990

SWITCH = Switch(
    "k_unroll4", "Four K steps per loop iteration, two peeled.", PR_990,
    claim="the K loop body holds 4 K steps instead of 2 (unroll 4 when (K/256 - 4) % 4 == 0, else 2); "
    "K steps 0 and 1 run before the loop and the last two after it; a full unroll would not fit the "
    "32 KiB instruction cache.",
    mechanism="the loop runs steps [2, K/256 - 2) four at a time; so that every loop step issues the same "
    "loads, the scale gather of step k + 3 is issued even at k = K/256 - 3 (global offset clamped to "
    "the last step, into the ring slot nobody reads any more); the tail is two steps.",
    metric="loop_mfma 256 -> 512, mfma 768 -> 1024 at 8192^3 (upstream: 256 -> 512 and 512 -> 1024).",
    expects=(Expect("loop_mfma", "up", seed_before=256, seed_after=512, note="loop body 2 -> 4 K steps"),
             Expect("mfma", "up", seed_before=512, seed_after=1024, note="2 peeled + 4 loop + 2 tail steps")),
)


class FourStepLoop:
    """PR #990's loop: steps 0 and 1 peeled, [2, K/256 - 2) four at a time, two tail steps."""

    head = 2
    unroll = 4
    uniform_steps = True


def apply(slots):
    return replace(slots, loop=FourStepLoop)
