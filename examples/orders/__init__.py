"""An example destination: a team's own service that receives forwarded events."""
