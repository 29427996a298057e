"""The admission webhook: validates GPU share requests and gates pods for the controller."""
