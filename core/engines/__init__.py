"""Clients for real serving engines behind one interface, so their measured streams meet the predictor.

Each client sends one request and yields token arrivals as they stream back, with their times:
the same TTFT and TPOT the single-run views and the simulator report, measured on a real server.
"""
