"""What both the client and the drivers (server, simulator, later the Kubernetes driver) may
import; it imports only the pure packages core, placement and topology."""
