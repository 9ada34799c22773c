"""The bottom layer: what every app may import (errors, schemas, queue, realtime, ...); it imports no app."""
