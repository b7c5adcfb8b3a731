"""The elastic campaign: autoscaling of hello_world and of the cell's machines under a Locust load that rises and falls."""
