"""What the tests of every tier share: waiting on conditions (waiting), a real trainqd
(daemon), job specs and trainers, stand-ins (apistub), real users (accounts, users), a real
monitor (monitor), engines (containers), Slurm (slurm), the browser (ui), and the fixtures
more than one tier uses (fixtures)."""
