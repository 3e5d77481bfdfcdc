#!/usr/bin/env bash
# test_prof_task.sh - run test_prof_task.py with the project's Python
# ($NP_PYTHON): nprobe train --profile, its schedule, FLOPs against torch's
# flop counter (left out without torch and in the sanitized pass), the slow
# faults through nprobe profile compare.
set -u
exec "${NP_PYTHON:?}" "$(dirname "$0")/test_prof_task.py"
