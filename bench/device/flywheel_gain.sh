#!/usr/bin/env bash
# GPU job (H200) of issue 25, the flywheel's gain: the embedded default VLA against the default
# fine-tuned on its own successful episodes (own-success) and on the embedded Stage 2 actor's
# (actor-success), all without lerobot (the records become frame caches through
# `rpent-stage1 export-cache --from-records`). 16 workers, CPU physics, GPU rendering, features,
# actor and fine-tuning on the GPU, the env's own episode limit. In order:
#   eval_default   the default on the held-out seeds 0..99                       ~1 min
#   record_vla     the default on the training seeds 200..499, recorded           ~3-4 min
#   cache_own      its successful episodes (VLA actions) -> frames.npz            ~1 min
#   ft_own         fine-tune of the default on cache_own (during record_actor)    ~1.5 min
#   record_actor   the actor (`--policy actor`) on the same seeds, recorded       ~3 min
#   cache_actor    its successful episodes, `--include-sources actor`             ~1 min
#   ft_actor       fine-tune on cache_actor (during eval_own and forget_own)      ~1 min
#   eval_*, forget_*  each fine-tuned VLA on 0..99 and on the training seeds 200..299 ~1 min each
# then bench/flywheel_table.py writes table.json and summary.md; 568 s in all (H200, 2026-12-03:
# default 0.66, own-success 0.71, actor-success 0.81 on seeds 0..99; bench/RESULTS.md).
# Fine-tuning (why these defaults): the caches train on the frames that start a chunk only
# (rpent_agents/stage1/record_export.py says why; the sixth lease's job trained on every frame and
# lost 19-24 points), ~1.6-2.5k image frames here, a tenth of the recorded steps. The default
# was trained at batch 256, peak rate 3e-4, on 32.7k image frames (best validation at ~14
# epochs, stage1_peg.sh); here: the same batch, a third of the rate (1e-4), 25 warm-up steps,
# cosine over 300 steps (~30-50 epochs), 10 held-out episodes checked every 25 steps and the
# best-validation weights kept, so the epochs cannot make it worse on held-out episodes of
# the data. Override with FT_STEPS, FT_BATCH, FT_LR, FT_WARMUP, FT_VAL_EPISODES, FT_LOG_EVERY,
# FT_MINUTES (the cap); seeds with HELDOUT_SEEDS, TRAIN_SEEDS, FORGET_SEEDS ("A..B" or a
# list); STAGE2_RUN (default: the embedded actor).
# $OUT (default /tmp/out) gets flywheel_gain.tar.gz (logs, run summaries, export reports,
# fine-tune configs and TensorBoard files, table.json, summary.md), table.json, summary.md,
# ft_actor.safetensors.xz.a? (the actor-success weights, split: join with cat), then done.
# Everything else stays in WORK_DIR (default /tmp/flywheel) on the machine: records, caches and
# both checkpoints (ft_own, ft_actor), for a Stage 2 run on the still-warm machine.
#
# On the lent H200 (10 min a command, ../shared/DEVICE.md): carry .carry (move bench/figures and
# docs/images out of the tree for that call; with the default actor's 9.8 MB the tree and
# .carry are over the 64 MiB a call carries: pack_carry.sh says what to do), and start it
# detached, polling until ~570 s:
#   1. (OUT=/tmp/job setsid nohup bash bench/device/flywheel_gain.sh > /tmp/job.log 2>&1 \
#        < /dev/null &); for i in $(seq 56); do [ -f /tmp/job/done ] && break; sleep 10; done; \
#        tail -n 5 /tmp/job.log
#   2. (at once, no carry) for i in $(seq 57); do [ -f /tmp/job/done ] && break; sleep 10; done; \
#        cp /tmp/job/* /tmp/job.log "$OUT"/; tail -n 25 /tmp/job.log
#   3. only if 2 ended before done: the same as 2.
# On a GPU machine of your own with RPent installed: RPENT_INSTALLED=1 bash bench/device/flywheel_gain.sh
# A CPU dry run (tiny sizes; lerobot, av and datasets hidden, as on the H200):
#   RPENT_DRY_RUN=1 RPENT_VENV=/path/to/.venv OUT=/tmp/fw_dry bash bench/device/flywheel_gain.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/out}"
work="${WORK_DIR:-/tmp/flywheel}"
if [ -e "$work/settings.json" ]; then
  echo "WORK_DIR $work holds an earlier job: remove it or set another WORK_DIR" >&2
  exit 1
fi
source bench/device/gpu_env.sh
if [ "${RPENT_DRY_RUN:-0}" = 1 ]; then
  # Seeds the default solves (29, 89) or fails and the actor solves (0) on the CPU renderer.
  : "${NUM_ENVS:=2}" "${HELDOUT_SEEDS:=0 1}" "${TRAIN_SEEDS:=0 29 89}" "${FORGET_SEEDS:=29 89}"
  : "${MAX_EPISODE_STEPS:=100}" "${FT_STEPS:=2}" "${FT_BATCH:=4}" "${FT_WARMUP:=0}"
  : "${FT_VAL_EPISODES:=0}" "${FT_LOG_EVERY:=1}"
  # The GPU machine has no lerobot (nor its av, datasets): hide them, so nothing leans on them.
  for module in lerobot av datasets; do
    mkdir -p "$work/.hidden/$module"
    echo "raise ImportError('$module is hidden: the GPU machine has none')" \
      > "$work/.hidden/$module/__init__.py"
  done
  export PYTHONPATH="$work/.hidden:$PYTHONPATH"
fi
workers="${NUM_ENVS:-16}"
checkpoint="${CHECKPOINT:-rpent_agents/features/default_checkpoint}"
seeds() { if [[ "$1" == *..* ]]; then seq -s ' ' "${1%..*}" "${1#*..}"; else echo "$1"; fi; }
heldout=$(seeds "${HELDOUT_SEEDS:-0..99}")
train=$(seeds "${TRAIN_SEEDS:-200..499}")
forget=$(seeds "${FORGET_SEEDS:-200..299}")
limit=()
if [ -n "${MAX_EPISODE_STEPS:-}" ]; then limit=(--max-episode-steps "$MAX_EPISODE_STEPS"); fi
actor=()
if [ -n "${STAGE2_RUN:-}" ]; then actor=(--stage2-run "$STAGE2_RUN"); fi
mkdir -p "$out" "$work/logs"
started=$(date +%s)

timed() {  # NAME COMMAND...: run it, append "NAME seconds" to logs/wall_s.txt
  local name=$1 begin
  begin=$(date +%s)
  "${@:2}"
  echo "$name $(($(date +%s) - begin))" >> "$work/logs/wall_s.txt"
  echo "$(date +%T) +$(($(date +%s) - started)) s: $name done in $(($(date +%s) - begin)) s"
}

run_policy() {  # FOLDER RPENT-RUN-ARGS...: one rpent-run into WORK_DIR/FOLDER
  python3 -m rpent_agents.run.cli --num-workers "$workers" --device "$DEVICE" \
    --env-kwargs "{\"render_backend\": \"$RENDER\"}" "${limit[@]}" --output-dir "$work/$1" \
    "${@:2}" 2>&1 | progress_free > "$work/logs/$1.log"
  grep -h -e '"successes"' -e '"episodes"' "$work/logs/$1.log" | tr -d ' \n'; echo " ($1)"
}

export_cache() {  # RUN CACHE [--include-sources actor]: the run's kept frames -> CACHE/frames.npz
  python3 -m rpent_agents.stage1.train export-cache --from-records "$work/$1" \
    --output-dir "$work/$2" --read-threads 8 "${@:3}" > "$work/logs/$2.log" 2>&1
  grep -h -e '"episodes"' -e '"frames"' "$work/logs/$2.log" | tr -d ' \n'; echo " ($2)"
}

fine_tune() {  # CACHE CHECKPOINT: the default fine-tuned on CACHE/frames.npz
  if [ ! -f "$work/$1/frames.npz" ]; then echo "no frames in $1: $2 not trained"; return; fi
  python3 -m rpent_agents.stage1.train train --data "$work/$1/frames.npz" \
    --init-from "$checkpoint" --output-dir "$work/$2" --device "$DEVICE" \
    --steps "${FT_STEPS:-300}" --batch-size "${FT_BATCH:-256}" \
    --learning-rate "${FT_LR:-1e-4}" --warmup-steps "${FT_WARMUP:-25}" \
    --val-episodes "${FT_VAL_EPISODES:-10}" --log-every "${FT_LOG_EVERY:-25}" \
    --save-every 1000000 --max-minutes "${FT_MINUTES:-4}" --weights-dtype bfloat16 \
    2>&1 | progress_free > "$work/logs/$2.log"
  grep -o "step [0-9]*: {.*" "$work/logs/$2.log" | tail -n 1
}

evaluate() {  # CHECKPOINT FOLDER SEEDS...: the fine-tuned VLA on the seeds
  if [ ! -f "$work/$1/model.safetensors" ]; then echo "no checkpoint $1: $2 not run"; return; fi
  run_policy "$2" --policy vla --checkpoint "$work/$1" --seeds "${@:3}"
}

cat > "$work/settings.json" <<JSON
{"workers": $workers, "render": "$RENDER", "device": "$DEVICE", "checkpoint": "$checkpoint",
 "stage2_run": "${STAGE2_RUN:-embedded default actor}", "max_episode_steps": "${MAX_EPISODE_STEPS:-env}",
 "heldout_seeds": "${HELDOUT_SEEDS:-0..99}", "train_seeds": "${TRAIN_SEEDS:-200..499}",
 "forget_seeds": "${FORGET_SEEDS:-200..299}", "ft_steps": ${FT_STEPS:-300},
 "ft_batch": ${FT_BATCH:-256}, "ft_lr": ${FT_LR:-1e-4}, "ft_warmup": ${FT_WARMUP:-25},
 "ft_val_episodes": ${FT_VAL_EPISODES:-10}, "ft_max_minutes": ${FT_MINUTES:-4}}
JSON
# shellcheck disable=SC2086  # the seed lists split into words on purpose
{
  timed eval_default run_policy eval_default --policy vla --seeds $heldout
  timed record_vla run_policy record_vla --policy vla --seeds $train --record-trajectory
  timed cache_own export_cache record_vla cache_own
  timed ft_own fine_tune cache_own ft_own &
  timed record_actor run_policy record_actor --policy actor "${actor[@]}" --seeds $train \
    --record-trajectory
  timed cache_actor export_cache record_actor cache_actor --include-sources actor
  wait
  timed ft_actor fine_tune cache_actor ft_actor &
  timed eval_own evaluate ft_own eval_own $heldout
  timed forget_own evaluate ft_own forget_own $forget
  wait
  timed eval_actor evaluate ft_actor eval_actor $heldout
  timed forget_actor evaluate ft_actor forget_actor $forget
}
echo "total $(($(date +%s) - started))" | tee -a "$work/logs/wall_s.txt"
python3 bench/flywheel_table.py --work-dir "$work" --output-dir "$work" --settings "$work/settings.json"
tar -czf "$out/flywheel_gain.tar.gz" -C "$work" --exclude=trajectories --exclude='*.npz' \
  --exclude='*.safetensors' --exclude=training_state.pt --exclude=.hidden .
cp "$work/table.json" "$work/summary.md" "$out/"
if [ -f "$work/ft_actor/model.safetensors" ]; then
  xz -T8 -c "$work/ft_actor/model.safetensors" | split -b 15M - "$out/ft_actor.safetensors.xz."
fi
touch "$out/done"
