#!/bin/bash
# Grade a class on a Slurm cluster: one array task per shard of the class.
#
#   sbatch --array=1-20 scripts/slurm/grade_array.sh SUBMISSIONS GRADES
#   sbatch --dependency=afterok:JOBID scripts/slurm/merge.sh GRADES
#
# Task K of N grades the K-th of N deterministic slices of SUBMISSIONS (a class
# folder, one folder per student) into GRADES/shard-K; merge.sh joins the shards
# into GRADES/all. Each task checks the grader on the reference solutions before
# it grades. The array's numbering may start at 0 or 1: K and N are taken from
# its first and last index.
#SBATCH --job-name=grade-attention
#SBATCH --cpus-per-task=2
#SBATCH --mem=4G
#SBATCH --time=00:30:00
set -euo pipefail

submissions=${1:?usage: sbatch --array=1-N grade_array.sh SUBMISSIONS GRADES}
grades=${2:?usage: sbatch --array=1-N grade_array.sh SUBMISSIONS GRADES}
first=${SLURM_ARRAY_TASK_MIN:?submit this script as an array job (--array=1-N)}
k=$(( SLURM_ARRAY_TASK_ID - first + 1 ))
n=$(( SLURM_ARRAY_TASK_MAX - first + 1 ))
grader=${ATTENTION_COURSE:-attention-course}

status=0
"$grader" grade "$submissions" --jobs "${SLURM_CPUS_PER_TASK:-1}" \
    --shard "$k/$n" --out "$grades/shard-$k" || status=$?
# 3: graded, and some submissions refused, each with its row: the shard did
# its work
if [ "$status" -ne 0 ] && [ "$status" -ne 3 ]; then
    exit "$status"
fi
