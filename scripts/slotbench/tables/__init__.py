"""Tables: the raw files consolidated into requests and cells, each request's server numbers
checked against the client, how its text arrived, a cell's open-loop numbers."""
