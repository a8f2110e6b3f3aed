"""How an analyze run is carried out (the flows in flows/ declare it): its state, phases, ids and summary."""
