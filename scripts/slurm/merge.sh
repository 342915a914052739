#!/bin/bash
# Join the shards that grade_array.sh wrote: GRADES/shard-* -> GRADES/all.
#   sbatch --dependency=afterok:JOBID scripts/slurm/merge.sh GRADES
#SBATCH --job-name=merge-grades
#SBATCH --cpus-per-task=1
#SBATCH --time=00:10:00
set -euo pipefail

grades=${1:?usage: sbatch --dependency=afterok:JOBID merge.sh GRADES}
grader=${ATTENTION_COURSE:-attention-course}
"$grader" merge "$grades"/shard-*/ --out "$grades/all"
