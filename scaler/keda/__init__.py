"""KEDA external scaler: kvpilot's decisions served over KEDA's `externalscaler.proto` gRPC protocol."""
