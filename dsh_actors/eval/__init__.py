"""The batch evaluation: episode files, named policies, the job, replay."""
